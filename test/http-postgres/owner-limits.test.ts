// The per-owner bounds on sources, webhooks, workflows and app accounts, on PostgreSQL: a fresh schema per server (FOUNT_TEST_STORE, test/helpers.ts).
process.env.FOUNT_TEST_STORE = "postgres";
await import("../http/owner-limits.test.ts");
