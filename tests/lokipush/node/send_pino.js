// Sends LOKI_COUNT records through pino-loki (JSON) to LOKI_URL with the bearer token
// LOKI_TOKEN, structured metadata from the `meta` key, then exits once it has sent them.
const pino = require('pino')
const { pinoLoki } = require('pino-loki')

const count = Number(process.env.LOKI_COUNT || '10')
const transport = pinoLoki({
  host: process.env.LOKI_URL,
  headers: { Authorization: `Bearer ${process.env.LOKI_TOKEN}` },
  labels: { app: 'pino-shop' },
  batching: false,
  structuredMetaKey: 'meta',
  silenceErrors: false
})
const logger = pino({ level: 'info' }, transport)
for (let i = 0; i < count; i++) {
  logger.warn({ meta: { trace_id: '0af7651916cd43dd8448eb211c80319c', n: String(i) } }, `pino message ${i}`)
}
setTimeout(() => process.exit(0), 2000)
