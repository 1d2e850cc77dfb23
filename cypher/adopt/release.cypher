// Take seeder-dgl's label and properties off the nodes of a graph adopted in place, committed
// every $batch nodes: all of them ($keep null: drop, adopt --reset), or those that no longer
// carry the user's label $keep (adopting again). Only the properties seeder-dgl wrote are named
// here (graphstore/schema.py OWNED_IN_PLACE, each <label>_<role>): the user's name, text and id
// properties, labels and relationships are not touched. Runs as an auto-commit query.
MATCH (n:{{dataset}})
WHERE $keep IS NULL OR NOT $keep IN labels(n)
CALL {
  WITH n
  REMOVE n.{{id}}, n.{{embedding}}, n.{{sketch}}, n.{{sketch_error}}, n.{{type}}, n.{{digest}}
  REMOVE n:{{dataset}}
} IN TRANSACTIONS OF $batch ROWS
RETURN count(*) AS done
