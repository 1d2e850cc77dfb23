// One batch of nodes of one type. CREATE, not MERGE: the batch and its progress counter commit
// together, so a resumed ingest never sees a half-written batch, and the id constraint guards the rest.
// key: the id the source gives the node, where it has one (node tables; absent otherwise).
// sketch, sketch_error: an int8 sketch of the embedding for K-hop (seeder_dgl/graphstore/sketch.py).
UNWIND $rows AS row
CREATE (n:{{dataset}}:{{node_type}} {id: row.id, name: row.name, text: row.text, type: $type_name, key: row.key,
                                     sketch: row.sketch, sketch_error: row.sketch_error})
WITH n, row
CALL db.create.setNodeVectorProperty(n, 'embedding', row.embedding)
RETURN count(*) AS written
