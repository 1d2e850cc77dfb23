// Store the int8 sketches computed from the stored embeddings of the nodes (seeder_dgl/graphstore/sketch.py).
UNWIND $rows AS row
MATCH (n:{{dataset}}) WHERE n.{{id}} = row.id
SET n.{{sketch}} = row.sketch, n.{{sketch_error}} = row.sketch_error
