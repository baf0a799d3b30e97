// Drives `mcprel gateway --stdio` in front of the reference server,
// server-everything, with the official TypeScript SDK's experimental task
// client (@modelcontextprotocol/sdk 1.32.2, the 2025-11-25 tasks API), and
// prints a JSON summary of what it saw. gateway_tasks_test.go runs it and
// judges the summary.
//
// usage: node gateway-tasks-client.mjs '<the gateway's argv as JSON>'
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { CallToolResultSchema, CreateTaskResultSchema } from '@modelcontextprotocol/sdk/types.js';

const argv = JSON.parse(process.argv[2] ?? '[]');
if (argv.length === 0) {
    console.error("usage: node gateway-tasks-client.mjs '<argv as JSON>'");
    process.exit(2);
}
const summary = { errors: [] };
const transport = new StdioClientTransport({ command: argv[0], args: argv.slice(1) });
const client = new Client({ name: 'mcprel-gateway-tasks-interop', version: '0.0.0' }, { capabilities: {} });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
try {
    await client.connect(transport);
    summary.serverTasks = client.getServerCapabilities()?.tasks ?? null;
    const { tools } = await client.listTools();
    summary.execution = tools.find((t) => t.name === 'simulate-research-query')?.execution ?? null;

    // The upstream's task-only tool, as a task of the gateway's: created,
    // its status followed, then its result.
    const kinds = [];
    const messages = [];
    let created, result;
    for await (const m of client.experimental.tasks.callToolStream(
        { name: 'simulate-research-query', arguments: { topic: 'tides' } }, CallToolResultSchema, { task: { ttl: 60000 } })) {
        kinds.push(m.type);
        if (m.type === 'taskCreated') created = m.task;
        if (m.type === 'taskStatus' && m.task?.statusMessage) messages.push(m.task.statusMessage);
        if (m.type === 'result') result = m.result;
        if (m.type === 'error') summary.errors.push(`stream: ${m.error?.message}`);
    }
    summary.stream = { kinds, messages, created, result };

    // Another, cancelled while the upstream works on it: the gateway's
    // task ends as the upstream's does.
    const long = await client.request(
        { method: 'tools/call', params: { name: 'simulate-research-query', arguments: { topic: 'waves' }, task: { ttl: 60000 } } },
        CreateTaskResultSchema);
    summary.longCreated = long.task;
    await sleep(300);
    summary.cancel = await client.experimental.tasks.cancelTask(long.task.taskId);
    let after;
    for (let i = 0; i < 300; i++) {
        after = await client.experimental.tasks.getTask(long.task.taskId);
        if (after.status !== 'working') break;
        await sleep(50);
    }
    summary.afterCancel = after;
} catch (e) {
    summary.errors.push(`${e.name}: ${e.message}`);
} finally {
    await client.close().catch(() => {});
}
console.log(JSON.stringify(summary));
