// Open (or reopen, to resume) an ingest: the record holds what is being written and how far it got.
MERGE (m:SeederDataset {name: $name})
ON CREATE SET m.nodes_done = 0, m.relationships_done = 0, m.started_at = datetime()
SET m += $meta, m.status = CASE WHEN m.status = 'complete' THEN 'complete' ELSE 'ingesting' END,
    m.sketch_version = randomUUID()
RETURN m {.*} AS meta
