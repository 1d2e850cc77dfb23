// Exact dense seeding through seeder.exactSeeds (neo4j/procedures/): float64 cosine against the
// stored embedding of every node of the dataset, its sketch deciding which embeddings are read;
// best first, ties by smaller id. seeding/exact.cypher is the same in Cypher (float32).
// $config: the dataset's property names (graphstore/schema.py), plus the record's sketch_version
// under which the procedure keeps the sketches it reads.
OPTIONAL MATCH (m:SeederDataset {name: $name})
// A record from before sketch versions: its ingest's finish time, since every write since renews it.
WITH $config AS config, coalesce(m.sketch_version, toString(m.finished_at)) AS version
CALL seeder.exactSeeds($label, $embedding, $k, config {.*, sketch_version: version})
YIELD id, similarity
RETURN id, similarity
