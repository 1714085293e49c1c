-- The baseline keyset pagination replaces: a page by OFFSET. ?1 the page size, ?2 the offset.
SELECT * FROM outbox ORDER BY sequence DESC LIMIT ?1 OFFSET ?2
