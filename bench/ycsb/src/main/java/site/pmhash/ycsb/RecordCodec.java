package site.pmhash.ycsb;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * A YCSB record (field name -> bytes) as one string value.
 *
 * <p>pmhash-server stores strings only, so a record is one value: its fields
 * one after another, each as
 *
 * <pre>
 *   name length   4 bytes, unsigned big-endian
 *   name          that many bytes, UTF-8
 *   value length  4 bytes, unsigned big-endian
 *   value         that many bytes, as given
 * </pre>
 *
 * <p>and nothing else: no header, no count, no padding. The empty value is
 * the record without fields. A field name appears at most once. Any other
 * value (a length running past the end, a truncated length) is not a record:
 * {@link #decode} throws {@link IllegalArgumentException}.
 */
final class RecordCodec {
  private static final int LENGTH_BYTES = 4;

  private RecordCodec() {}

  /** The value holding the fields of {@code record}, in its iteration order. */
  static byte[] encode(Map<String, byte[]> record) {
    int size = 0;
    byte[][] names = new byte[record.size()][];
    int i = 0;
    for (String name : record.keySet()) {
      names[i] = name.getBytes(StandardCharsets.UTF_8);
      size += 2 * LENGTH_BYTES + names[i].length + record.get(name).length;
      i++;
    }
    ByteBuffer out = ByteBuffer.allocate(size);
    i = 0;
    for (byte[] value : record.values()) {
      out.putInt(names[i].length).put(names[i]);
      out.putInt(value.length).put(value);
      i++;
    }
    return out.array();
  }

  /** The fields of {@code value}, in stored order; throws if it is not a record. */
  static Map<String, byte[]> decode(byte[] value) {
    Map<String, byte[]> record = new LinkedHashMap<>();
    ByteBuffer in = ByteBuffer.wrap(value);
    while (in.hasRemaining()) {
      byte[] name = chunk(in);
      byte[] field = chunk(in);
      if (record.put(new String(name, StandardCharsets.UTF_8), field) != null) {
        throw new IllegalArgumentException("field stored twice");
      }
    }
    return record;
  }

  private static byte[] chunk(ByteBuffer in) {
    if (in.remaining() < LENGTH_BYTES) {
      throw new IllegalArgumentException("truncated length");
    }
    long length = Integer.toUnsignedLong(in.getInt());
    if (length > in.remaining()) {
      throw new IllegalArgumentException("length " + length + " past the end");
    }
    byte[] bytes = new byte[(int) length];
    in.get(bytes);
    return bytes;
  }
}
