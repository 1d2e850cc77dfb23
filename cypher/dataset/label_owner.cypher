// The dataset (other than $name) whose record owns a label: two datasets never share one.
MATCH (m:SeederDataset {label: $label})
WHERE m.name <> $name
RETURN m.name AS name
LIMIT 1
