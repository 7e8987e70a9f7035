// The HTTP suite's fan-out and backfill bounds, on PostgreSQL: a fresh schema per server (FOUNT_TEST_STORE, test/helpers.ts).
process.env.FOUNT_TEST_STORE = "postgres";
await import("../http/fan-out-bounds.test.ts");
