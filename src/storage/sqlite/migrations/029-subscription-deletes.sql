-- Subscriptions deleted while their pending deliveries are deleted in batches (docs/delivery.md, "Deleting
-- a subscription"): 300,000 of them deleted in the request's transaction held the writer, every tenant's
-- ingest, for that long. A claim skips a delivery whose subscription is here; the row goes with the last
-- batch. Usually empty, so the claims' test of it is one lookup in an empty index.
CREATE TABLE subscription_deletes (
  id TEXT PRIMARY KEY,
  listener_id TEXT NOT NULL
);
