-- A webhook an admin allowed to reach loopback and private addresses (POST /v1/webhooks with
-- allow_private: only admins may set it), which the delivery guard otherwise refuses.
ALTER TABLE webhooks ADD COLUMN allow_private INTEGER NOT NULL DEFAULT 0;
