// Resample every index and clear the query caches, waiting for both. adopt SETs its id property on
// nodes that already exist, and until the id constraint's index is sampled again the planner may
// take it for empty: it then planned retrieval/khop_hop.cypher as a scan of that index for every
// frontier node (NodeIndexScan + Filter) instead of a NodeUniqueIndexSeek (seen on freshly
// adopted test graphs). After this, statements are planned on the statistics of the adopted graph.
CALL db.prepareForReplanning($seconds)
