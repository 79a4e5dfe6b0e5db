"""One picture through the three chat surfaces of a gateway, in integration
tests: Chat Completions image_url, Anthropic image (base64), Responses
input_image, each a data URL / base64 PNG followed by a text part."""
import json
import urllib.error
import urllib.request


class Surfaces:
    def __init__(self, url, model, max_tokens, timeout=300):
        self.url, self.model, self.n, self.timeout = url, model, max_tokens, timeout

    def post(self, path, body):
        """(status, parsed JSON body) of a POST; an HTTP error's too."""
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json",
                                              "anthropic-version": "2023-06-01"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def chat(self, png_b64, text):
        return self.post("/v1/chat/completions", {"model": self.model, "max_tokens": self.n, "temperature": 0,
                                                  "messages": [{"role": "user", "content": [
                                                      {"type": "image_url",
                                                       "image_url": {"url": "data:image/png;base64," + png_b64}},
                                                      {"type": "text", "text": text}]}]})

    def anth(self, png_b64, text):
        return self.post("/v1/messages", {"model": self.model, "max_tokens": self.n, "temperature": 0,
                                          "messages": [{"role": "user", "content": [
                                              {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                           "data": png_b64}},
                                              {"type": "text", "text": text}]}]})

    def resp(self, png_b64, text):
        return self.post("/v1/responses", {"model": self.model, "max_output_tokens": self.n, "temperature": 0,
                                           "input": [{"role": "user", "content": [
                                               {"type": "input_image", "image_url": "data:image/png;base64," + png_b64},
                                               {"type": "input_text", "text": text}]}]})

    def texts(self, png_b64, text):
        """{surface: (status, answer text trimmed or None, body)} for the three surfaces."""
        out = {}
        c, j = self.chat(png_b64, text)
        out["chat image_url"] = (c, j["choices"][0]["message"]["content"].strip() if c == 200 else None, j)
        c, j = self.anth(png_b64, text)
        out["anthropic image"] = (c, "".join(b.get("text", "") for b in j["content"]).strip() if c == 200 else None, j)
        c, j = self.resp(png_b64, text)
        out["responses input_image"] = (c, "".join(p.get("text", "") for o in j.get("output", [])
                                                   if o.get("type") == "message"
                                                   for p in o.get("content", [])).strip() if c == 200 else None, j)
        return out
