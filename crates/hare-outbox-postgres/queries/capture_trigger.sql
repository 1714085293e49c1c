-- (Re)creates the row trigger of one captured table and records the install.
-- {trigger} the trigger's name; {table} the schema-qualified captured table; {events} e.g.
-- `INSERT OR UPDATE OR DELETE`; {function} the trigger function; {record} the JSON record of the
-- install as a quoted literal.
DROP TRIGGER IF EXISTS {trigger} ON {table};
CREATE TRIGGER {trigger} AFTER {events} ON {table}
    FOR EACH ROW EXECUTE FUNCTION {function}();
COMMENT ON FUNCTION {function}() IS {record};
