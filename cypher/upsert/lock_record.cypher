// First statement of every upsert: write-lock the dataset record, then read its relation
// vocabulary. Concurrent upserts of one dataset wait here for each other, and each extends the
// vocabulary as the one before it committed it (read before the lock, two upserts adding
// different relations each wrote back a list without the other's). Reads after a write in the
// same statement see the latest committed values: Neo4j's pattern against lost updates.
// The writer lease of an ingest, adoption or drop in progress (graphstore/lease.py), if any: an
// upsert, one transaction, needs no lease of its own but does not write under another writer's.
MATCH (m:SeederDataset {name: $name})
SET m.updated_at = datetime()
WITH m
OPTIONAL MATCH (l:SeederLease {name: $name})
WHERE l.until >= datetime()
RETURN m.relation_names AS relation_names, m.relation_types AS relation_types,
       m.relation_embeddings AS relation_embeddings, m.node_type_names AS node_type_names,
       m.node_labels AS node_labels, l.command AS busy_with
