-- A deleted event is no longer queued for the event search's index: the index keeps its entry until the
-- whole generation of the index holding it is dropped, or its live rows are moved out of it
-- (search-generations.ts). A search joins every match to its row, so a gone row is never found. Deleting
-- an entry from FTS5 cost about 74 µs of CPU an event, as much as adding it, and a window larger than 100
-- deletes one event for every event it stores (docs/architecture.md, "The search index in generations").
DROP TRIGGER events_text_delete;
