// Embedding, type and name of each node id given, through seeder.nodeFeatures (neo4j/procedures/):
// the ids found, in the order given (missing ids absent), and their embeddings as one byte string
// of little-endian float32 rows. retrieval/node_features.cypher is the same for servers without it.
// $config: the dataset's property names (graphstore/schema.py).
CALL seeder.nodeFeatures($label, $ids, $config)
YIELD ids, embeddings, types, names
RETURN ids, embeddings, types, names
