// Forget a dataset's ingest record (after its nodes are gone).
MATCH (m:SeederDataset {name: $name})
DELETE m
