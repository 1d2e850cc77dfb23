// Sketches of the dataset's nodes were written: a new sketch_version, so that what the procedures
// kept under the old one is not read again (neo4j/procedures/: SketchCache).
MATCH (m:SeederDataset {name: $name})
SET m.sketch_version = randomUUID()
