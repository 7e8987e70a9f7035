// How much of an answer attempts keep, on PostgreSQL: a fresh schema per server (FOUNT_TEST_STORE, test/helpers.ts).
process.env.FOUNT_TEST_STORE = "postgres";
await import("../http/attempt-answer-size.test.ts");
