/**
 * Fount registry: new items of a feed. Polls an RSS 2.0, RSS 1.0 (RDF), Atom or JSON Feed URL on a timer
 * and emits each item it has not emitted before. The feed is parsed here, without packages, so that the
 * registry works offline: a small extraction of <item>/<entry> children, not a general XML parser.
 */
import { createHash } from "node:crypto";

// Pipedream's guideline: dedupe ids over 64 characters break the cache, so longer ones are hashed
// (a SHA-256 hex digest is exactly 64 characters).
const MAX_ID_LENGTH = 64;
// Ids of the last fetch kept in the db, so that a feed with more items than the 100-id dedupe cache
// does not re-emit its older items; bounded so that the db stays small.
const MAX_REMEMBERED_IDS = 1000;
// Under the default 30 s invocation limit, so that a slow feed fails with this error, not a timeout.
const FETCH_TIMEOUT_MS = 20_000;
// Larger documents are not feeds anyone should poll every few minutes.
const MAX_FEED_BYTES = 10 * 1024 * 1024;

// Where prepareXml set a CDATA section aside. NUL cannot occur in XML, so the mark is never feed text.
// biome-ignore lint/suspicious/noControlCharactersInRegex: the NUL is intended, see above.
const CDATA_MARK = /\u0000(\d+)\u0000/;

const ENTITIES = { lt: "<", gt: ">", amp: "&", quot: '"', apos: "'" };

function decodeEntities(text) {
  return text.replace(/&(#x[0-9a-fA-F]{1,6}|#[0-9]{1,7}|[a-zA-Z]+);/g, (whole, name) => {
    if (name[0] === "#") {
      const code =
        name[1] === "x" || name[1] === "X" ? Number.parseInt(name.slice(2), 16) : Number(name.slice(1));
      return code > 0 && code <= 0x10ffff ? String.fromCodePoint(code) : whole;
    }
    return ENTITIES[name] ?? whole;
  });
}

function escapeRegExp(text) {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/**
 * An XML document with its CDATA sections set aside (replaced by \u0000<n>\u0000) and comments removed,
 * so that markup inside CDATA or comments is never mistaken for elements.
 */
function prepareXml(xml) {
  const cdata = [];
  const body = xml
    .replace(/<!\[CDATA\[([\s\S]*?)\]\]>/g, (_, inner) => {
      cdata.push(inner);
      return `\u0000${cdata.length - 1}\u0000`;
    })
    .replace(/<!--[\s\S]*?-->/g, "");
  return { body, cdata };
}

/** Every element `name` (exact, prefix included) in `xml`: its attribute text and inner text. */
function elements(xml, name) {
  const n = escapeRegExp(name);
  const re = new RegExp(`<${n}(\\s[^>]*?)?(?:/>|>([\\s\\S]*?)</${n}\\s*>)`, "g");
  return [...xml.matchAll(re)].map((m) => ({ attrs: m[1] ?? "", inner: m[2] ?? "" }));
}

function attr(attrs, name) {
  const m = new RegExp(`(?:^|\\s)${escapeRegExp(name)}\\s*=\\s*(?:"([^"]*)"|'([^']*)')`).exec(attrs);
  return m ? decodeEntities(m[1] ?? m[2] ?? "") : undefined;
}

/** Character data of an element: entities decoded, CDATA restored verbatim. */
function textOf(inner, cdata) {
  return inner
    .split(CDATA_MARK)
    .map((part, i) => (i % 2 === 1 ? (cdata[Number(part)] ?? "") : decodeEntities(part)))
    .join("")
    .trim();
}

function collapse(text) {
  return text.replace(/\s+/g, " ").trim();
}

/** The text of an Atom text construct: `type="html"` and `"xhtml"` hold markup, which is dropped. */
function atomText(el, cdata) {
  const text = textOf(el.inner, cdata);
  const type = attr(el.attrs, "type");
  if (type !== "html" && type !== "xhtml") return collapse(text);
  return collapse(decodeEntities(text.replace(/<[^>]*>/g, "")));
}

function firstText(xml, names, cdata) {
  for (const name of names) {
    for (const el of elements(xml, name)) {
      const text = textOf(el.inner, cdata);
      if (text !== "") return text;
    }
  }
  return undefined;
}

function atomLink(xml) {
  const links = elements(xml, "link").filter((l) => attr(l.attrs, "href"));
  const alternate = links.find((l) => (attr(l.attrs, "rel") ?? "alternate") === "alternate");
  return alternate || links[0] ? attr((alternate ?? links[0]).attrs, "href") : undefined;
}

function isoDate(text) {
  if (!text) return { iso: null, ms: undefined };
  const ms = Date.parse(text);
  return Number.isFinite(ms) ? { iso: new Date(ms).toISOString(), ms } : { iso: null, ms: undefined };
}

function parseXmlFeed(xml) {
  const { body, cdata } = prepareXml(xml);
  const isAtom = /<feed[\s>]/.test(body) && !/<(rss|rdf:RDF)[\s>]/.test(body);
  const tag = isAtom ? "entry" : "item";
  const blocks = elements(body, tag);
  const firstItem = body.search(new RegExp(`<${tag}[\\s>/]`));
  const head = firstItem >= 0 ? body.slice(0, firstItem) : body;
  const title = (xml) => {
    const el = elements(xml, "title")[0];
    if (!el) return "";
    return isAtom ? atomText(el, cdata) : collapse(textOf(el.inner, cdata));
  };
  const feed = {
    title: title(head),
    link: isAtom ? atomLink(head) : (firstText(head, ["link"], cdata) ?? atomLink(head)),
  };
  const items = blocks.map(({ inner }) => {
    // An Atom <source> describes the feed an entry was copied from; its title and id are not the entry's.
    const x = inner.replace(/<source[\s>][\s\S]*?<\/source\s*>/g, "");
    const guid = firstText(x, isAtom ? ["id"] : ["guid", "dc:identifier"], cdata);
    const link = isAtom ? atomLink(x) : (firstText(x, ["link"], cdata) ?? atomLink(x));
    const published = isoDate(firstText(x, ["pubDate", "published", "dc:date", "issued"], cdata));
    const updated = isoDate(firstText(x, ["updated", "modified", "dc:modified"], cdata));
    const authorBlock = elements(x, "author")[0];
    const author = authorBlock
      ? collapse(firstText(authorBlock.inner, ["name"], cdata) ?? textOf(authorBlock.inner, cdata))
      : firstText(x, ["dc:creator"], cdata);
    const categories = [
      ...elements(x, "category").map((c) => attr(c.attrs, "term") ?? textOf(c.inner, cdata)),
      ...elements(x, "dc:subject").map((c) => textOf(c.inner, cdata)),
    ].filter((c) => c);
    return {
      guid,
      title: title(x),
      link: link ?? null,
      summary: firstText(x, isAtom ? ["summary"] : ["description"], cdata) ?? null,
      content: firstText(x, isAtom ? ["content"] : ["content:encoded"], cdata) ?? null,
      author: author || null,
      categories,
      published,
      updated,
    };
  });
  return { format: isAtom ? "atom" : "rss", feed, items };
}

function parseJsonFeed(data) {
  if (!data || typeof data !== "object" || !Array.isArray(data.items)) {
    throw new Error("The JSON document has no `items` array, so it is not a JSON Feed");
  }
  const str = (v) => (typeof v === "string" && v !== "" ? v : undefined);
  const items = data.items
    .filter((i) => i && typeof i === "object")
    .map((i) => {
      const authors = Array.isArray(i.authors) ? i.authors : i.author ? [i.author] : [];
      return {
        guid: i.id === undefined || i.id === null ? undefined : String(i.id),
        title: str(i.title) ?? "",
        link: str(i.url) ?? str(i.external_url) ?? null,
        summary: str(i.summary) ?? null,
        content: str(i.content_html) ?? str(i.content_text) ?? null,
        author:
          authors
            .map((a) => a?.name)
            .filter(Boolean)
            .join(", ") || null,
        categories: Array.isArray(i.tags) ? i.tags.map(String) : [],
        published: isoDate(str(i.date_published)),
        updated: isoDate(str(i.date_modified)),
      };
    });
  return {
    format: "json",
    feed: { title: str(data.title) ?? "", link: str(data.home_page_url) ?? null },
    items,
  };
}

/** Parses an RSS 2.0, RSS 1.0, Atom or JSON Feed document into one shape. */
export function parseFeed(text, contentType = "") {
  const start = text.trimStart();
  if (/json/i.test(contentType) || start.startsWith("{")) {
    let data;
    try {
      data = JSON.parse(text);
    } catch (err) {
      throw new Error(`The feed is not valid JSON: ${err.message}`);
    }
    return parseJsonFeed(data);
  }
  if (!/<(rss|rdf:RDF|feed)[\s>]/.test(text)) {
    throw new Error("The document is not an RSS, Atom or JSON feed");
  }
  return parseXmlFeed(text);
}

function idOf(item) {
  const raw = item.guid || item.link || `${item.title}\n${item.published.iso ?? ""}\n${item.summary ?? ""}`;
  return raw.length <= MAX_ID_LENGTH ? raw : createHash("sha256").update(raw).digest("hex");
}

export default {
  key: "feeds-new-item",
  name: "New Item in Feed",
  description:
    "Emit new items of an RSS, Atom or JSON Feed, polled on a timer (default every 15 minutes). Each item is emitted once.",
  version: "0.1.0",
  type: "source",
  dedupe: "unique",
  props: {
    url: {
      type: "string",
      label: "Feed URL",
      description: "The http(s) URL of an RSS 2.0, RSS 1.0, Atom or JSON Feed document.",
    },
    timer: {
      type: "$.interface.timer",
      label: "Polling schedule",
      description: "How often to fetch the feed.",
      default: { intervalSeconds: 900 },
    },
    db: "$.service.db",
  },
  methods: {
    /** The feed's text, or undefined when the server says it has not changed since the last fetch. */
    async fetchFeed() {
      let url;
      try {
        url = new URL(this.url);
      } catch {
        throw new Error(`The feed URL ${JSON.stringify(this.url)} is not a URL`);
      }
      if (url.protocol !== "http:" && url.protocol !== "https:") {
        throw new Error(`The feed URL must use http or https, not ${url.protocol}`);
      }
      const cached = this.db.get("http");
      const headers = {
        accept:
          "application/feed+json, application/rss+xml, application/atom+xml, application/json;q=0.9, application/xml;q=0.9, text/xml;q=0.8, */*;q=0.5",
        "user-agent": "Fount feeds-new-item",
      };
      // Conditional requests only for the URL the validators came from.
      if (cached?.url === url.href) {
        if (cached.etag) headers["if-none-match"] = cached.etag;
        if (cached.lastModified) headers["if-modified-since"] = cached.lastModified;
      }
      const res = await fetch(url, {
        headers,
        redirect: "follow",
        signal: AbortSignal.timeout(FETCH_TIMEOUT_MS),
      });
      if (res.status === 304) return undefined;
      if (!res.ok) throw new Error(`GET ${url.href} answered ${res.status} ${res.statusText}`.trim());
      const text = await res.text();
      if (text.length > MAX_FEED_BYTES) throw new Error(`The feed at ${url.href} is larger than 10 MB`);
      this.db.set("http", {
        url: url.href,
        etag: res.headers.get("etag") ?? undefined,
        lastModified: res.headers.get("last-modified") ?? undefined,
      });
      return { text, contentType: res.headers.get("content-type") ?? "" };
    },
  },
  async run() {
    const fetched = await this.fetchFeed();
    if (!fetched) return;
    const { feed, items } = parseFeed(fetched.text, fetched.contentType);
    const seen = new Set(this.db.get("seenIds") ?? []);
    // Feeds list newest first; emit oldest first, dated items by date, undated ones in reverse order.
    const ordered = items
      .map((item, index) => ({ item, index, id: idOf(item), ts: item.published.ms ?? item.updated.ms }))
      .sort((a, b) => {
        if (a.ts !== undefined && b.ts !== undefined) return a.ts - b.ts || b.index - a.index;
        if (a.ts !== undefined) return -1;
        if (b.ts !== undefined) return 1;
        return b.index - a.index;
      });
    for (const { item, id, ts } of ordered) {
      if (seen.has(id)) continue;
      const event = {
        id: item.guid ?? item.link ?? id,
        title: item.title,
        link: item.link,
        summary: item.summary,
        content: item.content,
        author: item.author,
        categories: item.categories,
        published: item.published.iso,
        updated: item.updated.iso,
        feed: { title: feed.title, link: feed.link ?? null, url: this.url },
      };
      this.$emit(event, {
        id,
        summary: item.title || item.link || "New feed item",
        ...(ts === undefined ? {} : { ts }),
      });
    }
    this.db.set(
      "seenIds",
      ordered.slice(-MAX_REMEMBERED_IDS).map((o) => o.id),
    );
  },
};
