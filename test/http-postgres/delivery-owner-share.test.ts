// The owners' share of delivery slots and claims, on PostgreSQL: a fresh schema per server (FOUNT_TEST_STORE, test/helpers.ts).
process.env.FOUNT_TEST_STORE = "postgres";
await import("../http/delivery-owner-share.test.ts");
