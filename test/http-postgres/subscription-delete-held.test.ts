// Deleting a route while its deliveries are held, on PostgreSQL: a fresh schema per server (FOUNT_TEST_STORE, test/helpers.ts).
process.env.FOUNT_TEST_STORE = "postgres";
await import("../http/subscription-delete-held.test.ts");
