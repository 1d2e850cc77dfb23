// Cosine vector index over the node embeddings of one dataset (dense seeding).
// Quantization off: Neo4j 5.26 quantizes by default, which reorders close neighbours; seeding
// must agree with exact cosine (tests compare with numpy). $quantization lets users trade that for memory.
CREATE VECTOR INDEX {{dataset}}_embedding IF NOT EXISTS
FOR (n:{{dataset}}) ON n.embedding
OPTIONS {indexConfig: {
  `vector.dimensions`: $dimensions,
  `vector.similarity_function`: 'cosine',
  `vector.quantization.enabled`: $quantization
}}
