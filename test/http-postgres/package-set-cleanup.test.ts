// The package set cleanup cases on PostgreSQL: which sets sources use is read from the store (FOUNT_TEST_STORE, test/helpers.ts).
process.env.FOUNT_TEST_STORE = "postgres";
await import("../http/package-set-cleanup.test.ts");
