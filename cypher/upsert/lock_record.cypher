// First statement of every upsert: write-lock the dataset record, then read its relation
// vocabulary. Concurrent upserts of one dataset wait here for each other, and each extends the
// vocabulary as the one before it committed it (read before the lock, two upserts adding
// different relations each wrote back a list without the other's). Reads after a write in the
// same statement see the latest committed values: Neo4j's pattern against lost updates.
MATCH (m:SeederDataset {name: $name})
SET m.updated_at = datetime()
RETURN m.relation_names AS relation_names, m.relation_types AS relation_types,
       m.relation_embeddings AS relation_embeddings
