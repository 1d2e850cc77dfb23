// Remove a dropped dataset's id constraint (and with it the index behind it).
DROP CONSTRAINT {{dataset}}_id IF EXISTS
