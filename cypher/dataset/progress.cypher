// Advance the resume counters in the same transaction as the batch they describe.
MATCH (m:SeederDataset {name: $name})
SET m.nodes_done = coalesce($nodes_done, m.nodes_done),
    m.relationships_done = coalesce($relationships_done, m.relationships_done)
