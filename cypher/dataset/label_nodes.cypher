// How many nodes carry the dataset's label (read from the count store, whatever the graph's size).
// Before a first ingest writes under a label that no dataset record owns, nodes already carrying
// it are someone else's: writing there would mix them in, and drop would delete them.
MATCH (n:{{dataset}})
RETURN count(n) AS nodes
