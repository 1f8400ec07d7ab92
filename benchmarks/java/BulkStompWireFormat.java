// An experiment of benchmarks/relay_throughput.py (--bulk-stomp-decoder), not shipped: a
// STOMP decoder for ActiveMQ that reads the connection in large reads into one buffer and
// splits the header lines in place. ActiveMQ's own (StompWireFormat) reads a frame's
// header block one byte at a time and gives every header line a buffer of its own; the
// benchmark runs the broker with this one to measure what that costs the relay.
//
// The benchmark installs it by putting a jar in the private broker's lib directory whose
// META-INF/services/org/apache/activemq/wireformat/stomp names BulkStompWireFormat$Factory:
// the broker's own lib directory comes before the installation's on its class path, so
// the STOMP connector finds this factory first. Everything after decoding (the STOMP to
// JMS conversion, the broker, the store) is ActiveMQ's.
//
// STOMP 1.2 framing: a command line, header lines up to an empty line (each line may end
// in CR LF), header values unescaped (\n, \c, \\, \r), the first of repeated headers wins;
// with content-length the body is that many bytes and then NUL, else up to the first NUL.
// EOLs between frames are heart-beats. Limits: the header block and the body are bounded
// by the connector's wireFormat.maxDataLength / maxFrameSize, beyond which the frame is a
// fatal protocol error, as ActiveMQ's own decoder answers.
import java.io.DataInput;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.HashMap;
import org.apache.activemq.transport.stomp.ProtocolException;
import org.apache.activemq.transport.stomp.StompFrame;
import org.apache.activemq.transport.stomp.StompFrameError;
import org.apache.activemq.transport.stomp.StompWireFormat;
import org.apache.activemq.transport.stomp.StompWireFormatFactory;
import org.apache.activemq.wireformat.WireFormat;

public class BulkStompWireFormat extends StompWireFormat {
    private static final int HEADER_LIMIT = 1 << 20;

    /** Creates one decoder per connection, with the connector's limits. */
    public static class Factory extends StompWireFormatFactory {
        @Override
        public WireFormat createWireFormat() {
            BulkStompWireFormat format = new BulkStompWireFormat();
            format.setMaxDataLength(getMaxDataLength());
            format.setMaxFrameSize(getMaxFrameSize());
            return format;
        }
    }

    private byte[] buffer = new byte[64 * 1024];
    private int start; // first byte not decoded yet
    private int end; // one past the last byte read

    /** Reads more bytes after the undecoded ones (moved to the front first). */
    private void read(DataInput in, long limit) throws IOException {
        if (start > 0) {
            System.arraycopy(buffer, start, buffer, 0, end - start);
            end -= start;
            start = 0;
        }
        if (end == buffer.length) {
            if (end >= limit) {
                throw new ProtocolException("The maximum frame size was exceeded", true);
            }
            buffer = Arrays.copyOf(buffer, (int) Math.min((long) buffer.length * 2, Integer.MAX_VALUE - 8));
        }
        int count = ((InputStream) in).read(buffer, end, buffer.length - end);
        if (count < 0) {
            throw new EOFException("the connection was closed");
        }
        end += count;
    }

    private static String decode(byte[] bytes, int from, int to) {
        int index = from;
        while (index < to && bytes[index] != '\\') {
            index++;
        }
        if (index == to) {
            return new String(bytes, from, to - from, StandardCharsets.UTF_8);
        }
        byte[] plain = new byte[to - from];
        int length = 0;
        for (index = from; index < to; index++) {
            byte b = bytes[index];
            if (b == '\\' && index + 1 < to) {
                byte escaped = bytes[++index];
                switch (escaped) {
                    case 'n': plain[length++] = '\n'; break;
                    case 'c': plain[length++] = ':'; break;
                    case 'r': plain[length++] = '\r'; break;
                    case '\\': plain[length++] = '\\'; break;
                    default: plain[length++] = b; plain[length++] = escaped;
                }
            } else {
                plain[length++] = b;
            }
        }
        return new String(plain, 0, length, StandardCharsets.UTF_8);
    }

    private static int lineEnd(byte[] bytes, int from, int newline) {
        return newline > from && bytes[newline - 1] == '\r' ? newline - 1 : newline;
    }

    @Override
    public Object unmarshal(DataInput in) throws IOException {
        try {
            long limit = Math.min(getMaxFrameSize(), (long) getMaxDataLength() + HEADER_LIMIT);
            while (true) { // heart-beats
                while (start < end && (buffer[start] == '\n' || buffer[start] == '\r')) {
                    start++;
                }
                if (start < end) {
                    break;
                }
                read(in, limit);
            }
            int blank; // the newline that ends the empty line after the headers
            int scanned = start + 1;
            while (true) {
                blank = -1;
                for (int i = scanned; i < end; i++) {
                    if (buffer[i] == '\n'
                            && (buffer[i - 1] == '\n' || (buffer[i - 1] == '\r' && buffer[i - 2] == '\n'))) {
                        blank = i;
                        break;
                    }
                }
                if (blank >= 0) {
                    break;
                }
                if (end - start > HEADER_LIMIT) {
                    throw new ProtocolException("The maximum header length was exceeded", true);
                }
                int moved = start;
                scanned = Math.max(end, start + 2);
                read(in, limit);
                scanned -= moved - start;
            }
            int newline = start;
            while (buffer[newline] != '\n') {
                newline++;
            }
            String action = new String(
                    buffer, start, lineEnd(buffer, start, newline) - start, StandardCharsets.UTF_8).trim();
            HashMap<String, String> headers = new HashMap<>(25);
            for (int line = newline + 1; line < blank; line = newline + 1) {
                newline = line;
                while (buffer[newline] != '\n') {
                    newline++;
                }
                int stop = lineEnd(buffer, line, newline);
                if (stop == line) {
                    break;
                }
                int colon = line;
                while (colon < stop && buffer[colon] != ':') {
                    colon++;
                }
                headers.putIfAbsent(
                        decode(buffer, line, colon), colon < stop ? decode(buffer, colon + 1, stop) : "");
            }
            start = blank + 1;
            byte[] body;
            String contentLength = headers.get("content-length");
            if (contentLength != null && (action.equals("SEND") || action.equals("MESSAGE"))) {
                int length;
                try {
                    length = Integer.parseInt(contentLength.trim());
                } catch (NumberFormatException e) {
                    throw new ProtocolException("Specified content-length is not a valid integer", true);
                }
                if (length < 0 || length > getMaxDataLength()) {
                    throw new ProtocolException("The maximum data length was exceeded", true);
                }
                while (end - start < length + 1) {
                    read(in, limit);
                }
                body = Arrays.copyOfRange(buffer, start, start + length);
                if (buffer[start + length] != 0) {
                    throw new ProtocolException(
                            "content-length bytes were read and there was no trailing null byte", true);
                }
                start += length + 1;
            } else {
                int nul = start;
                while (true) {
                    while (nul < end && buffer[nul] != 0) {
                        nul++;
                    }
                    if (nul < end) {
                        break;
                    }
                    if (nul - start > getMaxDataLength()) {
                        throw new ProtocolException("The maximum data length was exceeded", true);
                    }
                    int moved = start;
                    read(in, limit);
                    nul -= moved - start;
                }
                body = Arrays.copyOfRange(buffer, start, nul);
                start = nul + 1;
            }
            return new StompFrame(action, headers, body);
        } catch (ProtocolException e) {
            start = end; // the connection is closed after a fatal error
            return new StompFrameError(e);
        }
    }
}
