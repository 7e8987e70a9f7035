-- Where the other nodes reach a node (FOUNT_NODE_URL, or the address it listens on): a node that gets a
-- hit of a source another live node runs forwards the hit there instead of taking the source's lease.
-- NULL until the node listens, or when it takes no forwarded hits.
ALTER TABLE nodes ADD COLUMN url TEXT;
