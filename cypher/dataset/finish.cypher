// Mark an ingest complete with its final counts and timings.
MATCH (m:SeederDataset {name: $name})
SET m += $summary, m.status = 'complete', m.finished_at = datetime()
