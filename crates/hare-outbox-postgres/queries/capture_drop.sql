-- Removes one capture: {trigger} on {table} (when the table still exists) and {function}.
-- {drop_trigger} is empty when the table is gone.
{drop_trigger}
DROP FUNCTION IF EXISTS {function}();
