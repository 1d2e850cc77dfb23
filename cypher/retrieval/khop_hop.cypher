// One hop of K-hop-with-filtering (method.md, step 3). For every neighbour u of the frontier
// (both directions) not yet selected:
//   score(u) = 1/3 sim(q,u) + max over frontier edges v-r-u of [1/3 sim(q,v) + 1/3 sim(q,r)]
// and keep the top $limit by score, ties by smaller id. Only those rows leave the database, so a
// hub's neighbourhood is scored where it is stored. vector.similarity.cosine is (1 + cos) / 2.
// Partition p of $partitions scores only neighbours with id % $partitions = p (all of their
// frontier edges, so their scores are whole): the caller runs the partitions side by side and
// keeps the best $limit of their union, which is the best $limit overall. Reading u.embedding
// is what costs; partitions split it across the cores of the server (Community runs a query on one).
UNWIND $frontier AS f
MATCH (v:{{dataset}} {id: f.id})-[r]-(u:{{dataset}})
WHERE u.id % $partitions = $partition AND NOT u.id IN $selected
WITH u, max(f.similarity + coalesce($relation_similarity[type(r)], 0.0)) / 3.0 AS via
WITH u.id AS id, via, 2.0 * vector.similarity.cosine(u.embedding, $embedding) - 1.0 AS similarity
WITH id, similarity, similarity / 3.0 + via AS score
ORDER BY score DESC, id ASC
LIMIT $limit
RETURN id, similarity, score
