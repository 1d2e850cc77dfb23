// K-hop-with-filtering, every hop in one call of seeder.khop (neo4j/procedures/): the nodes the
// hops add to $seeds ([{id, similarity}]), hop by hop, and with $with_edges the relationships
// among all selected nodes (each once, as stored), as one row of parallel lists. The scores are
// the in-memory reference's, in float64 (seeder_dgl/retrieval/memory.py); retrieval/khop_hop.cypher
// and retrieval/induced_edges.cypher are the same, one query per hop, for servers without it.
// $relation_similarity: one map per hop of sim(q, r) per relationship type (a type not in it counts 0).
// $config: the dataset's property names and the relationship types it traverses (graphstore/schema.py),
// plus the record's sketch_version, under which the procedure keeps the sketches it reads.
// With config.features, also the embeddings (float32 bytes), types and names of every selected
// node, read with its score (featureIds: their ids, seeds first), as procedure/node_features gives them.
// walked: "copy" when the hops ran on the server's in-memory copy of the relationships (kept
// while no write changes them), "store" when they read the store. bounds: "index" when the
// neighbours were bounded from the in-memory copy of the dataset's sketches, "store" when from
// their own (while that copy is missing or being built, unless config.seed_index_wait). scored: "copy"
// when survivors were scored (and features read) from the server's in-memory copy of the nodes' ids,
// embeddings, types and names (kept while no write changes them or their relationships), else "store".
// relation_count: how many relation types the record lists now (dataset/relation_count.cypher), so
// a long-lived reader learns of upserted types without a round trip of its own (null: no record).
OPTIONAL MATCH (m:SeederDataset {name: $name})
// A record from before sketch versions: its ingest's finish time, since every write since renews it.
WITH $config AS config, coalesce(m.sketch_version, toString(m.finished_at)) AS version,
     size(m.relation_types) AS relation_count
CALL seeder.khop($label, $embedding, $seeds, $budgets, $relation_similarity, $with_edges,
                 config {.*, sketch_version: version})
YIELD ids, hops, similarities, scores, sources, targets, relations, walked, bounds, scored, featureIds, embeddings,
      types, names
RETURN ids, hops, similarities, scores, sources, targets, relations, walked, bounds, scored, featureIds, embeddings,
       types, names, relation_count
