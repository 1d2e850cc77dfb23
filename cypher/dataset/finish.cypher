// Mark an ingest complete with its final counts and timings. A new sketch_version: sketches the
// procedures kept under the old one are not read again (neo4j/procedures/: SketchCache).
MATCH (m:SeederDataset {name: $name})
SET m += $summary, m.status = 'complete', m.finished_at = datetime(), m.sketch_version = randomUUID()
