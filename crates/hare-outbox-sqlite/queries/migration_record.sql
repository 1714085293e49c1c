-- Records one applied version, in the transaction that applied it, at the database's clock in the
-- fixed timestamp format (strftime's %f has milliseconds). Values are rendered as literals (the
-- text `schema` prints must run without parameters); run again, it adds nothing.
INSERT INTO {migrations} (table_name, version, name, checksum, applied_at)
VALUES ({table_name}, {version}, {name}, {checksum}, strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000Z')
ON CONFLICT (table_name, version) DO NOTHING;
