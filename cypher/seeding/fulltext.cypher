// Full-text seeding: nodes whose names match the question's words (Lucene query built from the
// escaped question, its longer words fuzzy, passed as a parameter), with their cosine to the
// query for K-hop scoring (from the Euclidean similarity of unit vectors, as in
// retrieval/khop_hop.cypher), their type, and their number of relationships of each of the
// dataset's relationship types ({{degrees}}: built from validated types by cypher.degree_counts),
// which entity linking compares with the relations the question asks for.
// Where a dataset's names are written with '_' (DBpedia titles), $words asks the same words of
// the name-words index too ($words_index, schema/words_index.cypher), so a name is found whether
// the question writes it joined ('Virginia_gubernatorial_election,_1993') or with spaces; a node
// both find keeps its higher score. Elsewhere $words is '' and that branch reads nothing.
// One row of parallel lists: 50 records cost the driver about 2 ms more than one record of lists.
CALL () {
  CALL db.index.fulltext.queryNodes($index, $lucene, {limit: $candidates}) YIELD node, score
  RETURN node, score
  UNION ALL
  WITH $words AS words WHERE words <> ''
  CALL db.index.fulltext.queryNodes($words_index, words, {limit: $candidates}) YIELD node, score
  RETURN node, score
}
WITH node, max(score) AS text_score
WITH node, node.{{id}} AS id, text_score
ORDER BY text_score DESC, id ASC
LIMIT $candidates
// Rows ordered before collect() give lists in that order (Cypher manual, ORDER BY); entity
// linking orders the candidates again by its own score anyway.
WITH node, id, text_score,
     1.5 - 0.5 / vector.similarity.euclidean(node.{{embedding}}, $embedding) AS similarity
RETURN collect(id) AS ids, collect(coalesce(toStringOrNull(node.{{name}}), '')) AS names,
       collect(text_score) AS text_scores, collect(similarity) AS similarities,
       collect(coalesce(node.{{type}}, '')) AS types, collect({{degrees}}) AS degrees
