// Nodes with the user's label, not adopted by this dataset, that already hold a property named
// like one seeder-dgl would write (graphstore/schema.py): adopting them would overwrite it.
MATCH (n:{{label}})
WHERE NOT n:{{dataset}} AND (n.{{id}} IS NOT NULL OR n.{{embedding}} IS NOT NULL OR n.{{sketch}} IS NOT NULL OR
                             n.{{sketch_error}} IS NOT NULL OR n.{{type}} IS NOT NULL OR n.{{digest}} IS NOT NULL)
RETURN count(n) AS clashes
