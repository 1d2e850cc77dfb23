// Exact dense seeding and K-hop-with-filtering in one statement: procedure/exact_seeds.cypher's
// $k seeds, then procedure/khop.cypher from them, so a query with exact dense seeds makes one round
// trip and sends its embedding once. seeds: [{id, similarity}], best first, ties by smaller id, as
// seeder.exactSeeds gives them; the other columns are seeder.khop's.
OPTIONAL MATCH (m:SeederDataset {name: $name})
// A record from before sketch versions: its ingest's finish time, since every write since renews it.
WITH $config AS given, coalesce(m.sketch_version, toString(m.finished_at)) AS version,
     size(m.relation_types) AS relation_count
WITH given {.*, sketch_version: version} AS config, relation_count
CALL (config) {
  CALL seeder.exactSeeds($label, $embedding, $k, config) YIELD id, similarity
  RETURN collect({id: id, similarity: similarity}) AS seeds
}
CALL seeder.khop($label, $embedding, seeds, $budgets, $relation_similarity, $with_edges, config)
YIELD ids, hops, similarities, scores, sources, targets, relations, walked, bounds, scored, featureIds, embeddings,
      types, names
RETURN seeds, ids, hops, similarities, scores, sources, targets, relations, walked, bounds, scored, featureIds,
       embeddings, types, names, relation_count
