// The HTTP suite's sse-replay-wait cases, on PostgreSQL: a fresh schema per server (FOUNT_TEST_STORE, test/helpers.ts).
process.env.FOUNT_TEST_STORE = "postgres";
await import("../http/sse-replay-wait.test.ts");
