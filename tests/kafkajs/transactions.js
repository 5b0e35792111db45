// KafkaJS transactions against a Kafka listener (tests/e2e/test_kafkajs.py):
//
//     node tests/kafkajs/transactions.js BOOTSTRAP TOPIC
//
// TOPIC has 2 partitions. A transactional producer (idempotent, one request in flight, as KafkaJS requires) writes
// one transaction to both partitions and commits it ("committed-0", "committed-1"), one more it aborts
// ("aborted-0", "aborted-1"), then a last committed one ("after-0", "after-1"): once a consumer has read that, all
// before it in each partition is decided, so a consumer that has seen "after-*" has seen all it ever will. A
// read_committed consumer (readUncommitted: false) and a read_uncommitted one then read the topic from its
// beginning, each in a group of its own. Prints {"read_committed": [...], "read_uncommitted": [...]}, each record
// {partition, offset, key, value}; exits 1 on any error.
'use strict'

const crypto = require('crypto')
const { Partitioners } = require('kafkajs')
const { client, readUntil, run } = require('./common')

async function main () {
  const [bootstrap, topic] = process.argv.slice(2)
  if (!bootstrap || !topic) throw new Error('usage: node transactions.js BOOTSTRAP TOPIC')
  const tag = crypto.randomBytes(4).toString('hex')
  const kafka = client(bootstrap, `kafkajs-txn-${tag}`)

  const producer = kafka.producer({
    transactionalId: `kafkajs-txn-${tag}`,
    idempotent: true,
    maxInFlightRequests: 1,
    createPartitioner: Partitioners.DefaultPartitioner // every message names its partition; and no v2 warning
  })
  await producer.connect()
  try {
    for (const [name, end] of [['committed', 'commit'], ['aborted', 'abort'], ['after', 'commit']]) {
      const transaction = await producer.transaction()
      try {
        await transaction.send({
          topic,
          acks: -1,
          messages: [0, 1].map(partition => ({ partition, key: `${name}-${partition}`, value: `${name}-${partition}` }))
        })
      } catch (error) {
        await transaction.abort()
        throw error
      }
      await transaction[end]()
    }
  } finally {
    await producer.disconnect()
  }

  const done = seen => ['after-0', 'after-1'].every(value => seen.some(r => r.value === value))
  const answer = {}
  for (const [name, readUncommitted] of [['read_committed', false], ['read_uncommitted', true]]) {
    answer[name] = await readUntil(kafka, { topic, groupId: `kafkajs-${name}-${tag}`, readUncommitted, done })
  }
  return answer
}

run(main)
