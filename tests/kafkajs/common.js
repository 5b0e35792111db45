// What the KafkaJS scripts share: a client whose logs go to stderr (stdout is the script's JSON answer), a
// consumer that reads until it has seen what it waits for, and the exit on error (tests/e2e/test_kafkajs.py).
'use strict'

const { Kafka, logLevel } = require('kafkajs')

const LEVELS = { [logLevel.ERROR]: 'ERROR', [logLevel.WARN]: 'WARN', [logLevel.INFO]: 'INFO', [logLevel.DEBUG]: 'DEBUG' }

function client (bootstrap, clientId) {
  const logCreator = () => ({ namespace, level, log }) => {
    const { message, ...extra } = log
    process.stderr.write(`${LEVELS[level]} [${namespace}] ${message} ${JSON.stringify(extra)}\n`)
  }
  return new Kafka({
    clientId,
    brokers: [bootstrap],
    logLevel: process.env.KAFKAJS_LOG_LEVEL === 'debug' ? logLevel.DEBUG : logLevel.INFO,
    logCreator,
    retry: { retries: 8, initialRetryTime: 200 }
  })
}

// The records seen by a consumer of a new group, from the topic's beginning, until `done(seen)` holds (or fails
// after `timeoutMs`): each as {partition, offset, key, value}.
async function readUntil (kafka, { topic, groupId, readUncommitted, done, timeoutMs = 60000 }) {
  const consumer = kafka.consumer({ groupId, readUncommitted, heartbeatInterval: 500, maxWaitTimeInMs: 500 })
  const seen = []
  await consumer.connect()
  try {
    await consumer.subscribe({ topic, fromBeginning: true })
    await new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`${groupId}: not done after ${timeoutMs} ms; seen ${JSON.stringify(seen)}`)),
        timeoutMs
      )
      consumer.on(consumer.events.CRASH, ({ payload }) => {
        clearTimeout(timer)
        reject(payload.error)
      })
      consumer.run({
        eachMessage: async ({ partition, message }) => {
          seen.push(record(partition, message))
          if (done(seen)) {
            clearTimeout(timer)
            resolve()
          }
        }
      }).catch(reject)
    })
  } finally {
    await consumer.disconnect()
  }
  return seen
}

function record (partition, message) {
  return {
    partition,
    offset: Number(message.offset),
    key: message.key === null ? null : message.key.toString(),
    value: message.value === null ? null : message.value.toString()
  }
}

// Runs `main`, prints its answer as one line of JSON; exits 1 (with the error on stderr) if it fails.
function run (main) {
  main()
    .then(answer => {
      process.stdout.write(JSON.stringify(answer) + '\n')
      process.exit(0)
    })
    .catch(error => {
      process.stderr.write(`FAILED: ${error && error.stack ? error.stack : error}\n`)
      process.exit(1)
    })
}

module.exports = { client, readUntil, record, run }
