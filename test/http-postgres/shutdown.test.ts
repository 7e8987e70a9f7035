// The HTTP suite's shutdown cases, on PostgreSQL: the process runs on a fresh schema (FOUNT_TEST_STORE, test/http/shutdown.test.ts).
process.env.FOUNT_TEST_STORE = "postgres";
await import("../http/shutdown.test.ts");
