// The HTTP suite's bound on what one run's listeners copy, on PostgreSQL: a fresh schema per server (FOUNT_TEST_STORE, test/helpers.ts).
process.env.FOUNT_TEST_STORE = "postgres";
await import("../http/routed-bytes.test.ts");
