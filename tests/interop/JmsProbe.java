import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Enumeration;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.atomic.AtomicReference;

import javax.jms.BytesMessage;
import javax.jms.Connection;
import javax.jms.Destination;
import javax.jms.JMSException;
import javax.jms.Message;
import javax.jms.MessageConsumer;
import javax.jms.Session;
import javax.jms.TextMessage;
import javax.jms.Topic;

import org.apache.activemq.ActiveMQConnectionFactory;

/**
 * A minimal JMS 1.1 topic consumer, the way Oozie's JMS accessor reads hcat-notify
 * messages: ActiveMQConnectionFactory over OpenWire, non-transacted AUTO_ACKNOWLEDGE
 * session, one (non-durable) consumer with an optional selector.
 *
 * <p>Options (each falls back to an environment variable):
 * <pre>
 *   --url URL          JMS_PROBE_URL        OpenWire URL, e.g. tcp://127.0.0.1:61616
 *   --user USER        JMS_PROBE_USER
 *   --password PW      JMS_PROBE_PASSWORD   (prefer the variable: keeps it off ps)
 *   --topic NAME       JMS_PROBE_TOPIC      topic name, e.g. hcat.web.clicks
 *   --selector SQL     JMS_PROBE_SELECTOR   optional JMS message selector
 *   --count N          JMS_PROBE_COUNT      messages to wait for (default 1)
 *   --timeout SECONDS  JMS_PROBE_TIMEOUT    deadline for all N, from READY (default 30)
 *   --linger SECONDS   JMS_PROBE_LINGER     keep listening after N arrived (default 0)
 *   --client-id ID     JMS_PROBE_CLIENT_ID  the connection's client id (for --durable)
 *   --durable NAME     JMS_PROBE_DURABLE    a durable subscription of that name (needs
 *                                           --client-id), removed when the probe ends
 *   --distinct PROP    JMS_PROBE_DISTINCT   count messages with distinct values of this
 *                                           property (repeats are printed, not counted)
 *   --hive true        JMS_PROBE_HIVE       also parse each TextMessage with Hive 2.3's
 *                                           JSONMessageDeserializer (needs the Hive jars
 *                                           PySpark ships on the class path)
 * </pre>
 *
 * <p>The URL may be a failover URL ({@code failover:(tcp://a:61616,tcp://b:61617)}): the
 * client then moves to whichever broker serves, and a durable subscription keeps what
 * was published while it moved.
 *
 * <p>With {@code --hive true} each message's JSON gains {@code hive}: what Hive's reader
 * made of the body, chosen by the {@code HCAT_EVENT} property as Hive's
 * {@code MessageDeserializer} does, after {@code checkValid()} ({@code eventType},
 * {@code db}, {@code table}, {@code server}, {@code servicePrincipal}, {@code timestamp},
 * and {@code partitions}, {@code partitionKeyValues}, {@code files} where the message
 * type has them), or {@code hiveError}: why it could not. Hive is reached by reflection,
 * so the probe compiles and runs without its jars when this is off.
 *
 * <p>Output (stdout, UTF-8, pure ASCII since every non-ASCII char is \\u-escaped): one
 * line {@code READY} once the consumer is registered at the broker (creating a consumer
 * is a synchronous round trip in ActiveMQ), then one JSON object per message.
 *
 * <p>Exit codes: 0 exactly N messages arrived; 2 timeout before N (what did arrive was
 * printed); 3 more than N arrived within the linger time; 1 connection, authentication,
 * authorization or selector error, or the connection failed (message on stderr);
 * 64 bad usage.
 */
public final class JmsProbe {
    static final int EXIT_OK = 0;
    static final int EXIT_ERROR = 1;
    static final int EXIT_TIMEOUT = 2;
    static final int EXIT_TOO_MANY = 3;
    static final int EXIT_USAGE = 64;

    private static boolean hive;

    private JmsProbe() {
    }

    public static void main(String[] args) {
        PrintStream out = new PrintStream(new FileOutputStream(FileDescriptor.out), true,
                StandardCharsets.UTF_8);
        Map<String, String> opts = new TreeMap<>();
        for (int i = 0; i < args.length; i++) {
            String arg = args[i];
            if (!arg.startsWith("--") || i + 1 >= args.length) {
                System.err.println("JmsProbe: bad argument " + arg);
                System.exit(EXIT_USAGE);
            }
            opts.put(arg.substring(2), args[++i]);
        }
        String url = opt(opts, "url", "JMS_PROBE_URL", null);
        String user = opt(opts, "user", "JMS_PROBE_USER", null);
        String password = opt(opts, "password", "JMS_PROBE_PASSWORD", null);
        String topicName = opt(opts, "topic", "JMS_PROBE_TOPIC", null);
        String selector = opt(opts, "selector", "JMS_PROBE_SELECTOR", null);
        hive = Boolean.parseBoolean(opt(opts, "hive", "JMS_PROBE_HIVE", "false"));
        if (selector != null && selector.isEmpty()) {
            selector = null;
        }
        Subscription subscription = new Subscription(
                opt(opts, "client-id", "JMS_PROBE_CLIENT_ID", null),
                opt(opts, "durable", "JMS_PROBE_DURABLE", null),
                opt(opts, "distinct", "JMS_PROBE_DISTINCT", null));
        int count;
        double timeout;
        double linger;
        try {
            count = Integer.parseInt(opt(opts, "count", "JMS_PROBE_COUNT", "1"));
            timeout = Double.parseDouble(opt(opts, "timeout", "JMS_PROBE_TIMEOUT", "30"));
            linger = Double.parseDouble(opt(opts, "linger", "JMS_PROBE_LINGER", "0"));
        } catch (NumberFormatException e) {
            System.err.println("JmsProbe: bad number: " + e.getMessage());
            System.exit(EXIT_USAGE);
            return;
        }
        if (url == null || topicName == null || count < 0 || timeout < 0 || linger < 0
                || (subscription.durable != null && subscription.clientId == null)) {
            System.err.println("usage: JmsProbe --url URL --topic NAME [--user U] [--password P]"
                    + " [--selector SQL] [--count N] [--timeout S] [--linger S]"
                    + " [--client-id ID [--durable NAME]] [--distinct PROPERTY]");
            System.exit(EXIT_USAGE);
        }
        System.exit(run(out, url, user, password, topicName, selector, count, timeout, linger,
                subscription));
    }

    private static String opt(Map<String, String> opts, String name, String env, String dflt) {
        String value = opts.get(name);
        if (value == null) {
            value = System.getenv(env);
        }
        return value == null ? dflt : value;
    }

    /** How the probe subscribes and what it counts. */
    static final class Subscription {
        final String clientId;
        final String durable;
        final String distinct;
        private final Set<String> seen = new HashSet<>();

        Subscription(String clientId, String durable, String distinct) {
            this.clientId = clientId;
            this.durable = durable;
            this.distinct = distinct;
        }

        /** Whether {@code message} counts towards --count (always, without --distinct). */
        boolean counts(Message message) throws JMSException {
            return distinct == null || seen.add(String.valueOf(message.getObjectProperty(distinct)));
        }
    }

    private static int run(PrintStream out, String url, String user, String password,
            String topicName, String selector, int count, double timeout, double linger,
            Subscription subscription) {
        ActiveMQConnectionFactory factory = new ActiveMQConnectionFactory(url);
        // No advisory consumer of our own: the probe only needs its one subscription.
        factory.setWatchTopicAdvisories(false);
        // Bound the CONNECT round trip (authentication happens there).
        factory.setConnectResponseTimeout(15_000);
        AtomicReference<JMSException> failure = new AtomicReference<>();
        Connection connection = null;
        try {
            try {
                connection = factory.createConnection(user, password);
                if (subscription.clientId != null) {
                    connection.setClientID(subscription.clientId);
                }
                connection.setExceptionListener(failure::set);
                connection.start();
                Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
                Topic topic = session.createTopic(topicName);
                MessageConsumer consumer;
                if (subscription.durable != null) {
                    consumer = session.createDurableSubscriber(topic, subscription.durable,
                            selector, false);
                } else {
                    consumer = selector == null
                            ? session.createConsumer(topic)
                            : session.createConsumer(topic, selector);
                }
                out.println("READY");
                out.flush();
                try {
                    return consume(out, consumer, failure, count, timeout, linger, subscription);
                } finally {
                    if (subscription.durable != null && failure.get() == null) {
                        // Leave nothing behind that would keep collecting messages.
                        consumer.close();
                        session.unsubscribe(subscription.durable);
                    }
                }
            } catch (JMSException e) {
                System.err.println("JmsProbe: " + describe(e));
                return EXIT_ERROR;
            }
        } finally {
            if (connection != null) {
                try {
                    connection.close();
                } catch (JMSException e) {
                    // closing is best effort; the exit code is already decided
                }
            }
        }
    }

    private static int consume(PrintStream out, MessageConsumer consumer,
            AtomicReference<JMSException> failure, int count, double timeout, double linger,
            Subscription subscription) throws JMSException {
        int received = 0;
        long deadline = System.nanoTime() + (long) (timeout * 1e9);
        while (received < count) {
            long remainingMs = (deadline - System.nanoTime()) / 1_000_000L;
            if (remainingMs <= 0) {
                System.err.println("JmsProbe: timeout after " + timeout + "s: received "
                        + received + " of " + count + " message(s)");
                return EXIT_TIMEOUT;
            }
            Message message = consumer.receive(Math.min(remainingMs, 200L));
            if (failure.get() != null) {
                System.err.println("JmsProbe: connection failed: " + describe(failure.get()));
                return EXIT_ERROR;
            }
            if (message != null) {
                out.println(toJson(message));
                out.flush();
                if (subscription.counts(message)) {
                    received++;
                }
            }
        }
        int extra = 0;
        long lingerEnd = System.nanoTime() + (long) (linger * 1e9);
        while (true) {
            long remainingMs = (lingerEnd - System.nanoTime()) / 1_000_000L;
            if (remainingMs <= 0) {
                break;
            }
            Message message = consumer.receive(Math.min(remainingMs, 200L));
            if (failure.get() != null) {
                System.err.println("JmsProbe: connection failed: " + describe(failure.get()));
                return EXIT_ERROR;
            }
            if (message != null) {
                out.println(toJson(message));
                out.flush();
                if (subscription.counts(message)) {
                    extra++;
                }
            }
        }
        if (extra > 0) {
            System.err.println("JmsProbe: " + extra + " message(s) more than the expected "
                    + count);
            return EXIT_TOO_MANY;
        }
        return EXIT_OK;
    }

    private static String describe(Throwable e) {
        StringBuilder sb = new StringBuilder(e.getClass().getName() + ": " + e.getMessage());
        for (Throwable c = e.getCause(); c != null && c != c.getCause(); c = c.getCause()) {
            sb.append(" (caused by ").append(c.getClass().getName()).append(": ")
                    .append(c.getMessage()).append(')');
        }
        return sb.toString();
    }

    // ------------------------------------------------------------------------- JSON

    static String toJson(Message message) throws JMSException {
        StringBuilder sb = new StringBuilder(256);
        sb.append('{');
        field(sb, "jmsClass").append(quote(message.getClass().getName())).append(',');
        boolean isText = message instanceof TextMessage;
        field(sb, "isTextMessage").append(isText).append(',');
        field(sb, "isBytesMessage").append(message instanceof BytesMessage).append(',');
        String text = null;
        String textError = null;
        if (isText) {
            try {
                text = ((TextMessage) message).getText();
            } catch (JMSException e) {
                // e.g. AMQ-8398: a STOMP body with 4-byte UTF-8 is not decodable over OpenWire
                textError = describe(e);
            }
        }
        field(sb, "text").append(quote(text)).append(',');
        field(sb, "textError").append(quote(textError)).append(',');
        if (hive && text != null) {
            hiveJson(sb, message.getStringProperty("HCAT_EVENT"), text);
        }
        if (message instanceof BytesMessage) {
            BytesMessage bytes = (BytesMessage) message;
            byte[] data = new byte[(int) bytes.getBodyLength()];
            bytes.readBytes(data);
            field(sb, "bodyLength").append(data.length).append(',');
            field(sb, "bytesAsUtf8").append(quote(new String(data, StandardCharsets.UTF_8)))
                    .append(',');
        }
        field(sb, "properties").append('{');
        Map<String, Object> props = new TreeMap<>();
        for (Enumeration<?> names = message.getPropertyNames(); names.hasMoreElements();) {
            String name = (String) names.nextElement();
            props.put(name, message.getObjectProperty(name));
        }
        boolean first = true;
        for (Map.Entry<String, Object> e : props.entrySet()) {
            if (!first) {
                sb.append(',');
            }
            first = false;
            Object value = e.getValue();
            field(sb, e.getKey()).append('{');
            field(sb, "type").append(value == null ? "null" : quote(value.getClass().getSimpleName()))
                    .append(',');
            field(sb, "value").append(value == null ? "null" : quote(String.valueOf(value)))
                    .append('}');
        }
        sb.append("},");
        Destination destination = message.getJMSDestination();
        field(sb, "destination").append(destination == null ? "null" : quote(destination.toString()))
                .append(',');
        String topicName = destination instanceof Topic ? ((Topic) destination).getTopicName() : null;
        field(sb, "topicName").append(topicName == null ? "null" : quote(topicName)).append(',');
        field(sb, "deliveryMode").append(message.getJMSDeliveryMode()).append(',');
        field(sb, "priority").append(message.getJMSPriority()).append(',');
        field(sb, "redelivered").append(message.getJMSRedelivered()).append(',');
        field(sb, "timestamp").append(message.getJMSTimestamp()).append(',');
        field(sb, "expiration").append(message.getJMSExpiration()).append(',');
        String type = message.getJMSType();
        field(sb, "jmsType").append(type == null ? "null" : quote(type)).append(',');
        String correlation = message.getJMSCorrelationID();
        field(sb, "jmsCorrelationId").append(correlation == null ? "null" : quote(correlation))
                .append(',');
        String id = message.getJMSMessageID();
        field(sb, "jmsMessageId").append(id == null ? "null" : quote(id));
        sb.append('}');
        return sb.toString();
    }

    /** Hive's deserializer method for each HCAT_EVENT, as its MessageDeserializer maps them. */
    private static String hiveMethod(String event) {
        switch (event == null ? "" : event) {
            case "ADD_PARTITION":
                return "getAddPartitionMessage";
            case "DROP_PARTITION":
                return "getDropPartitionMessage";
            case "INSERT":
                return "getInsertMessage";
            case "CREATE_TABLE":
                return "getCreateTableMessage";
            case "DROP_TABLE":
                return "getDropTableMessage";
            default:
                return null;
        }
    }

    private static void hiveJson(StringBuilder sb, String event, String text) {
        String method = hiveMethod(event);
        if (method == null) {
            field(sb, "hiveError").append(quote("Hive has no message type " + event)).append(',');
            return;
        }
        try {
            Class<?> type = Class.forName(
                    "org.apache.hadoop.hive.metastore.messaging.json.JSONMessageDeserializer");
            Object deserializer = type.getDeclaredConstructor().newInstance();
            Object parsed = type.getMethod(method, String.class).invoke(deserializer, text);
            parsed.getClass().getMethod("checkValid").invoke(parsed);
            StringBuilder out = new StringBuilder();
            out.append('{');
            field(out, "class").append(quote(parsed.getClass().getSimpleName()));
            String[][] getters = {
                {"eventType", "getEventType"}, {"db", "getDB"}, {"table", "getTable"},
                {"server", "getServer"}, {"servicePrincipal", "getServicePrincipal"},
                {"timestamp", "getTimestamp"}, {"partitions", "getPartitions"},
                {"partitionKeyValues", "getPartitionKeyValues"}, {"files", "getFiles"},
            };
            for (String[] getter : getters) {
                java.lang.reflect.Method m;
                try {
                    m = parsed.getClass().getMethod(getter[1]);
                } catch (NoSuchMethodException e) {
                    continue;
                }
                Object value = m.invoke(parsed);
                out.append(',');
                field(out, getter[0]).append(jsonValue(value));
            }
            out.append('}');
            field(sb, "hive").append(out).append(',');
        } catch (java.lang.reflect.InvocationTargetException e) {
            field(sb, "hiveError").append(quote(describe(e.getCause()))).append(',');
        } catch (ReflectiveOperationException | LinkageError e) {
            field(sb, "hiveError").append(quote(describe(e))).append(',');
        }
    }

    /** A getter's value as JSON: maps, lists and iterables as such, numbers as numbers. */
    static String jsonValue(Object value) {
        if (value == null) {
            return "null";
        }
        if (value instanceof Number || value instanceof Boolean) {
            return String.valueOf(value);
        }
        if (value instanceof Map) {
            StringBuilder sb = new StringBuilder("{");
            boolean first = true;
            for (Map.Entry<?, ?> e : ((Map<?, ?>) value).entrySet()) {
                if (!first) {
                    sb.append(',');
                }
                first = false;
                sb.append(quote(String.valueOf(e.getKey()))).append(':').append(jsonValue(e.getValue()));
            }
            return sb.append('}').toString();
        }
        if (value instanceof Iterable) {
            StringBuilder sb = new StringBuilder("[");
            boolean first = true;
            for (Object item : (Iterable<?>) value) {
                if (!first) {
                    sb.append(',');
                }
                first = false;
                sb.append(jsonValue(item));
            }
            return sb.append(']').toString();
        }
        return quote(String.valueOf(value));
    }

    private static StringBuilder field(StringBuilder sb, String name) {
        return sb.append(quote(name)).append(':');
    }

    /** A JSON string literal; everything outside printable ASCII is \\u-escaped (UTF-16
     * units, so astral characters become valid surrogate-pair escapes). */
    static String quote(String s) {
        if (s == null) {
            return "null";
        }
        StringBuilder sb = new StringBuilder(s.length() + 2);
        sb.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"':
                    sb.append("\\\"");
                    break;
                case '\\':
                    sb.append("\\\\");
                    break;
                case '\n':
                    sb.append("\\n");
                    break;
                case '\r':
                    sb.append("\\r");
                    break;
                case '\t':
                    sb.append("\\t");
                    break;
                default:
                    if (c < 0x20 || c > 0x7e) {
                        sb.append(String.format("\\u%04x", (int) c));
                    } else {
                        sb.append(c);
                    }
            }
        }
        return sb.append('"').toString();
    }
}
