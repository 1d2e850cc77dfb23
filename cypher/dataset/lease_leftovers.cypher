// Whether seeder-dgl still has anything in this database that the lease constraint serves.
CALL { MATCH (m:SeederDataset) RETURN count(m) AS datasets }
CALL { MATCH (l:SeederLease) RETURN count(l) AS leases }
RETURN datasets, leases
