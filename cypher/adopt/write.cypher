// One batch of adopted nodes: seeder-dgl's label and its own properties (graphstore/schema.py),
// nothing of the user's. Each node is found by the element id read earlier in this same run and
// must still carry the user's label. The sketch is written with the embedding, always together:
// K-hop trusts its bounds. $embedding_property: the dataset's own embedding property.
UNWIND $rows AS row
MATCH (n:{{label}}) WHERE elementId(n) = row.key
SET n:{{dataset}}, n.{{id}} = row.id, n.{{type}} = row.type, n.{{sketch}} = row.sketch,
    n.{{sketch_error}} = row.sketch_error, n.{{digest}} = row.digest
WITH n, row
CALL db.create.setNodeVectorProperty(n, $embedding_property, row.embedding)
RETURN count(*) AS written
