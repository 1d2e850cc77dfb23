// Exact dense seeding through seeder.exactSeeds (neo4j/procedures/): float64 cosine against the
// stored embedding of every node of the dataset, its sketch deciding which embeddings are read;
// best first, ties by smaller id. seeding/exact.cypher is the same in Cypher (float32).
// $config: the dataset's property names (graphstore/schema.py).
CALL seeder.exactSeeds($label, $embedding, $k, $config)
YIELD id, similarity
RETURN id, similarity
