// The broker's own floor for benchmarks/relay_throughput.py: persistent text messages in
// JMS transactions of a batch size, over OpenWire with ActiveMQ's own client.
//
// Usage: java OpenWireProducer BROKER_URL USER PASSWORD BATCH FILE
// FILE holds one message a line: topic TAB properties TAB body, the properties as
// name=value pairs separated by \u0001. The messages are read once; then each line "go"
// on stdin sends them all (a new connection each time, as the relay connects each run)
// and prints the seconds from connecting to the last COMMIT's return.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import javax.jms.Connection;
import javax.jms.DeliveryMode;
import javax.jms.MessageProducer;
import javax.jms.Session;
import javax.jms.TextMessage;
import javax.jms.Topic;
import org.apache.activemq.ActiveMQConnectionFactory;

public final class OpenWireProducer {
    private OpenWireProducer() {}

    public static void main(String[] args) throws Exception {
        String url = args[0];
        String user = args[1];
        String password = args[2];
        int batch = Integer.parseInt(args[3]);
        List<String[]> messages = new ArrayList<>();
        for (String line : Files.readAllLines(Paths.get(args[4]), StandardCharsets.UTF_8)) {
            messages.add(line.split("\t", 3));
        }
        BufferedReader commands =
                new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        System.out.println("ready " + messages.size());
        System.out.flush();
        for (String command = commands.readLine(); command != null; command = commands.readLine()) {
            if (!command.equals("go")) {
                break;
            }
            long started = System.nanoTime();
            ActiveMQConnectionFactory factory = new ActiveMQConnectionFactory(user, password, url);
            Connection connection = factory.createConnection();
            try {
                connection.start();
                Session session = connection.createSession(true, Session.SESSION_TRANSACTED);
                MessageProducer producer = session.createProducer(null);
                producer.setDeliveryMode(DeliveryMode.PERSISTENT);
                Map<String, Topic> topics = new HashMap<>();
                int inBatch = 0;
                for (String[] message : messages) {
                    Topic topic = topics.computeIfAbsent(message[0], name -> {
                        try {
                            return session.createTopic(name);
                        } catch (javax.jms.JMSException e) {
                            throw new IllegalStateException(e);
                        }
                    });
                    TextMessage text = session.createTextMessage(message[2]);
                    if (!message[1].isEmpty()) {
                        for (String pair : message[1].split("\u0001")) {
                            int equals = pair.indexOf('=');
                            text.setStringProperty(pair.substring(0, equals), pair.substring(equals + 1));
                        }
                    }
                    producer.send(topic, text);
                    if (++inBatch == batch) {
                        session.commit();
                        inBatch = 0;
                    }
                }
                if (inBatch > 0) {
                    session.commit();
                }
            } finally {
                connection.close();
            }
            System.out.println((System.nanoTime() - started) / 1e9);
            System.out.flush();
        }
    }
}
