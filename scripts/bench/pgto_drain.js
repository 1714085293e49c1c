// Drives pg-transactional-outbox 0.5.7 for the side-by-side drain (relay_peers.py).
//   node pgto_drain.js setup SCHEMA             prints the library's own polling set-up SQL
//   node pgto_drain.js drain SCHEMA BATCH HOST PORT USER DATABASE
//                                               drains SCHEMA.outbox with a no-op handler
//                                               until killed
const {
  DatabaseSetupExporter,
  getDisabledLogger,
  initializePollingMessageListener,
} = require('pg-transactional-outbox');

const [mode, schema, batch, host, port, user, database] = process.argv.slice(2);

if (mode === 'setup') {
  process.stdout.write(
    DatabaseSetupExporter.createPollingScript(
      {
        outboxOrInbox: 'outbox',
        database: 'test',
        schema,
        table: 'outbox',
        listenerRole: 'postgres',
        nextMessagesName: 'next_outbox_messages',
      },
      true,
    ),
  );
} else {
  const [shutdown] = initializePollingMessageListener(
    {
      outboxOrInbox: 'outbox',
      dbListenerConfig: { host, port: Number(port), user, database },
      settings: {
        dbSchema: schema,
        dbTable: 'outbox',
        nextMessagesFunctionSchema: schema,
        nextMessagesFunctionName: 'next_outbox_messages',
        nextMessagesBatchSize: Number(batch),
        nextMessagesPollingIntervalInMs: 50,
        enableMaxAttemptsProtection: false,
        enablePoisonousMessageProtection: false,
      },
    },
    { handle: async () => {} },
    getDisabledLogger(),
  );
  process.on('SIGTERM', () => shutdown().finally(() => process.exit(0)));
}
