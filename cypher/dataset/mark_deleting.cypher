// A reset or drop starts: the record stays (it owns the label) but no longer calls the dataset
// complete; a reset cut off half way is finished by the next ingest or drop.
MATCH (m:SeederDataset {name: $name})
SET m.status = 'deleting'
