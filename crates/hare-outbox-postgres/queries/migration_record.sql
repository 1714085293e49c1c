-- Records one applied version, in the transaction that applied it. Values are rendered as
-- literals (the text `schema` prints must run without parameters); run again, it adds nothing.
INSERT INTO {migrations} (table_name, version, name, checksum)
VALUES ({table_name}, {version}, {name}, {checksum})
ON CONFLICT (table_name, version) DO NOTHING;
