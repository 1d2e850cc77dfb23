// How many relation types a dataset's record lists: upserts only ever append to that list, so a
// changed count tells a long-lived reader (a server) to read the record again.
MATCH (m:SeederDataset {name: $name})
RETURN size(m.relation_types) AS relations
