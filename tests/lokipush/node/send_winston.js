// Sends LOKI_COUNT records through winston-loki (protobuf + snappy unless LOKI_JSON=1)
// to LOKI_URL with the bearer token LOKI_TOKEN, then flushes and exits.
const winston = require('winston')
const LokiTransport = require('winston-loki')

const count = Number(process.env.LOKI_COUNT || '10')
const errors = []
const transport = new LokiTransport({
  host: process.env.LOKI_URL,
  headers: { Authorization: `Bearer ${process.env.LOKI_TOKEN}`, 'X-Scope-OrgID': 'someone-else' },
  labels: { app: 'winston-shop', env: 'test', body: process.env.LOKI_JSON === '1' ? 'json' : 'protobuf' },
  json: process.env.LOKI_JSON === '1',
  batching: true,
  interval: 0.2,
  clearOnError: true,
  onConnectionError: (err) => errors.push(String(err))
})
const logger = winston.createLogger({ transports: [transport] })
for (let i = 0; i < count; i++) {
  logger.log({ level: i % 3 === 0 ? 'error' : 'info', message: `order ${i} placed`, labels: { shard: String(i % 2) } })
}
setTimeout(async () => {
  await transport.flush()
  await new Promise((resolve) => setTimeout(resolve, 500))
  if (errors.length) {
    console.error(errors.join('\n'))
    process.exit(1)
  }
  process.exit(0)
}, 500)
