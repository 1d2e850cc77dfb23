// One hop of K-hop-with-filtering (method.md, step 3). For every neighbour u of the frontier
// (both directions) not yet selected:
//   score(u) = 1/3 sim(q,u) + max over frontier edges v-r-u of [1/3 sim(q,v) + 1/3 sim(q,r)]
// and keep the top $limit by score, ties by smaller id. Only those rows leave the database, so a
// hub's neighbourhood is scored where it is stored.
// cos(q, u) comes from vector.similarity.euclidean = 1 / (1 + d^2): the query and every stored
// embedding are unit vectors (the writer and upsert store them so), hence cos = 1 - d^2 / 2 =
// 1.5 - 0.5 / euclidean. It agrees with vector.similarity.cosine to ~1e-6 and costs a third of it,
// which matters here: it runs once per neighbour of the frontier.
// Partition p of $partitions scores only neighbours with id % $partitions = p (all of their
// frontier edges, so their scores are whole): the caller runs the partitions side by side and
// keeps the best $limit of their union, which is the best $limit overall. Reading u.embedding
// is what costs; partitions split it across the cores of the server (Community runs a query on one).
UNWIND $frontier AS f
MATCH (v:{{dataset}} {id: f.id})-[r]-(u:{{dataset}})
WHERE u.id % $partitions = $partition AND NOT u.id IN $selected
WITH u, max(f.similarity + coalesce($relation_similarity[type(r)], 0.0)) / 3.0 AS via
WITH u.id AS id, via, 1.5 - 0.5 / vector.similarity.euclidean(u.embedding, $embedding) AS similarity
WITH id, similarity, similarity / 3.0 + via AS score
ORDER BY score DESC, id ASC
LIMIT $limit
// One row of parallel lists (the driver handles it faster than a record per node); the caller
// orders them again by (score desc, id asc), so nothing depends on collect() keeping the order.
RETURN collect(id) AS ids, collect(similarity) AS similarities, collect(score) AS scores
