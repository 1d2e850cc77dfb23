// One hop of K-hop-with-filtering (method.md, step 3). For every neighbour u of the frontier
// (both directions):
//   score(u) = 1/3 sim(q,u) + max over frontier edges v-r-u of [1/3 sim(q,v) + 1/3 sim(q,r)]
// and keep the top $limit by score, ties by smaller id. Only those rows leave the database, so the
// neighbourhood of a hub is scored where it is stored.
// Nodes selected by earlier hops are not excluded here: the caller asks for as many more rows as
// there are selected nodes and drops them, which gives the same top $limit. Testing every
// neighbour against the selected ids here meant reading its id property, the slowest part of the
// statement at Prime scale.
// Partition p of $partitions scores only the neighbours whose internal id is p modulo $partitions,
// with all their frontier edges, so their scores are whole: the caller runs the partitions side by
// side (Community runs a query on one core) and keeps the best of their union. Every partition
// walks all frontier relationships, the cheap part; the scoring after that is split evenly even
// when one frontier node is a hub. The internal id is in the relationship record: no read.
// $types: the relationship types the dataset traverses (null: all; a constant test when null).
UNWIND $frontier AS f
MATCH (v:{{dataset}} {{{id}}: f.id})-[r]-(u:{{dataset}})
WHERE id(u) % $partitions = $partition AND ($types IS NULL OR type(r) IN $types)
WITH u, max(f.similarity + coalesce($relation_similarity[type(r)], 0.0)) / 3.0 AS via
// Pass 1: bounds on every score from int8 sketches (seeder_dgl/graphstore/sketch.py) of both
// the node and the query: |sim(q,u) - cos(query sketch, node sketch)| <= sketch_error +
// $query_sketch_error. Byte arrays are read whole; a list parameter would be converted value by
// value on every row (measured: 6.6 against 3.8 us a node). vector.similarity.cosine returns
// (1 + cos) / 2. A node without a sketch gets the widest bounds.
WITH u, via,
     coalesce(2.0 * vector.similarity.cosine(u.{{sketch}}, $query_sketch) - 1.0, 0.0) AS approx,
     coalesce(u.{{sketch_error}}, 2.0) + $query_sketch_error AS error
WITH u, via, via + (approx - error) / 3.0 AS low, via + (approx + error) / 3.0 AS high
// A full sort, not a bounded Top (ORDER BY low DESC LIMIT $limit) in a CALL subquery: that was
// 9% faster on a Prime-scale hop, but each row the Top keeps also holds the lists of all
// candidates, and the transaction memory estimate counts them once per row (measured: more
// than 128 MB against less than 32 MB on one hop; 8 clients ran out of the 1.4 GB pool).
ORDER BY low DESC
WITH collect({node: u, via: via, high: high}) AS candidates, collect(low) AS lows
// $limit neighbours score at least the $limit-th best low bound, so a neighbour whose high bound
// is below it cannot be in the top $limit. Fewer candidates than $limit: all of them stay.
WITH candidates, coalesce(lows[$limit - 1], -10.0) AS threshold
UNWIND candidates AS c
WITH c WHERE c.high >= threshold
// Gathered again so that the rows below no longer hold the list of all candidates (the memory
// estimate of the Top operator would count that list once per row).
WITH collect(c) AS survivors
UNWIND survivors AS c
// Pass 2: exact scores of the survivors. cos(q, u) comes from vector.similarity.euclidean =
// 1 / (1 + d^2): the query and every stored embedding are unit vectors (the writer and upsert
// store them so), hence cos = 1 - d^2 / 2 = 1.5 - 0.5 / euclidean; it agrees with
// vector.similarity.cosine to ~1e-6 and costs a third of it.
WITH c.node AS u, c.via AS via
WITH u.{{id}} AS id, via, 1.5 - 0.5 / vector.similarity.euclidean(u.{{embedding}}, $embedding) AS similarity
WITH id, similarity, similarity / 3.0 + via AS score
ORDER BY score DESC, id ASC
LIMIT $limit
// One row of parallel lists (the driver handles it faster than a record per node); the caller
// orders them again by (score desc, id asc), so nothing depends on collect() keeping the order.
RETURN collect(id) AS ids, collect(similarity) AS similarities, collect(score) AS scores
