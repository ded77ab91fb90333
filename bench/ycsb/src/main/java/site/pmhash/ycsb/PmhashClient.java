package site.pmhash.ycsb;

import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.Vector;
import redis.clients.jedis.DefaultJedisClientConfig;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.Jedis;
import redis.clients.jedis.exceptions.JedisException;
import site.ycsb.ByteArrayByteIterator;
import site.ycsb.ByteIterator;
import site.ycsb.DB;
import site.ycsb.DBException;
import site.ycsb.Status;

/**
 * YCSB's client of pmhash-server, over Jedis; any server of the Redis
 * protocol serves it, redis-server too, with the same keys and values.
 *
 * <p>A record is one string value under the record's key ({@link RecordCodec}
 * has the format); the table name is not part of the key, as the server has
 * one database. The operations, one or two commands each:
 *
 * <ul>
 *   <li>insert: SET of the encoded record.
 *   <li>read: GET, decoded, the asked fields kept.
 *   <li>update: GET, the new fields merged into the decoded record, SET. The
 *       two commands are not one atomic step (the server has no
 *       compare-and-set a client can call, nor MULTI/EXEC), so of two clients
 *       updating one record at once the later SET wins and the other's fields
 *       are lost: last writer wins per record. YCSB's own Redis binding keeps
 *       a record as a Redis hash and updates with HMSET, atomic per field; the
 *       server serves strings only, which is why the record is one value here.
 *   <li>delete: DEL.
 *   <li>scan: not implemented. Workload E asks for the records following a
 *       start key in key order; a hash index has no order to follow.
 * </ul>
 *
 * <p>YCSB makes one instance per client thread; each holds one connection.
 *
 * <p>Properties: {@code redis.host} (default 127.0.0.1), {@code redis.port}
 * (6379), {@code redis.password} (none: no AUTH), {@code redis.timeout} (the
 * connect and reply timeout in milliseconds, default 10000).
 */
public final class PmhashClient extends DB {
  private Jedis jedis;

  @Override
  public void init() throws DBException {
    Properties p = getProperties();
    String host = p.getProperty("redis.host", "127.0.0.1");
    int port = Integer.parseInt(p.getProperty("redis.port", "6379"));
    int timeout = Integer.parseInt(p.getProperty("redis.timeout", "10000"));
    String password = p.getProperty("redis.password");
    DefaultJedisClientConfig.Builder config = DefaultJedisClientConfig.builder()
        .connectionTimeoutMillis(timeout)
        .socketTimeoutMillis(timeout);
    if (password != null && !password.isEmpty()) {
      config.password(password);
    }
    try {
      jedis = new Jedis(new HostAndPort(host, port), config.build());
      jedis.ping();
    } catch (JedisException e) {
      throw new DBException("cannot reach a Redis-protocol server at " + host + ":" + port
          + " (redis.host, redis.port, redis.password): " + e.getMessage(), e);
    }
  }

  @Override
  public void cleanup() {
    if (jedis != null) {
      jedis.close();
      jedis = null;
    }
  }

  @Override
  public Status read(String table, String key, Set<String> fields,
                     Map<String, ByteIterator> result) {
    try {
      byte[] value = jedis.get(bytes(key));
      if (value == null) {
        return Status.NOT_FOUND;
      }
      for (Map.Entry<String, byte[]> f : RecordCodec.decode(value).entrySet()) {
        if (fields == null || fields.contains(f.getKey())) {
          result.put(f.getKey(), new ByteArrayByteIterator(f.getValue()));
        }
      }
      return Status.OK;
    } catch (JedisException | IllegalArgumentException e) {
      return Status.ERROR;
    }
  }

  @Override
  public Status scan(String table, String startkey, int recordcount, Set<String> fields,
                     Vector<HashMap<String, ByteIterator>> result) {
    return Status.NOT_IMPLEMENTED;
  }

  @Override
  public Status update(String table, String key, Map<String, ByteIterator> values) {
    try {
      byte[] k = bytes(key);
      byte[] old = jedis.get(k);
      if (old == null) {
        return Status.NOT_FOUND;
      }
      Map<String, byte[]> record = RecordCodec.decode(old);
      record.putAll(toBytes(values));
      jedis.set(k, RecordCodec.encode(record));
      return Status.OK;
    } catch (JedisException | IllegalArgumentException e) {
      return Status.ERROR;
    }
  }

  @Override
  public Status insert(String table, String key, Map<String, ByteIterator> values) {
    try {
      jedis.set(bytes(key), RecordCodec.encode(toBytes(values)));
      return Status.OK;
    } catch (JedisException e) {
      return Status.ERROR;
    }
  }

  @Override
  public Status delete(String table, String key) {
    try {
      return jedis.del(bytes(key)) == 1 ? Status.OK : Status.NOT_FOUND;
    } catch (JedisException e) {
      return Status.ERROR;
    }
  }

  private static byte[] bytes(String key) {
    return key.getBytes(StandardCharsets.UTF_8);
  }

  private static Map<String, byte[]> toBytes(Map<String, ByteIterator> values) {
    Map<String, byte[]> out = new LinkedHashMap<>();
    for (Map.Entry<String, ByteIterator> v : values.entrySet()) {
      out.put(v.getKey(), v.getValue().toArray());
    }
    return out;
  }
}
