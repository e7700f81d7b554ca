// Score image files with an exported detector from Node.js: node score.mjs model.onnx image.png [...]
//
// The model must come from `python export.py ... graph_preprocess=true`: it takes the decoded
// image (N x H x W x 3 uint8) and does the crop / pad / resize and scaling itself, so this script
// only decodes. onnxruntime-node cannot read ONNX metadata, so the input name, threshold and
// outputs come from the JSON sidecar export.py writes beside the model (model.json).
// Prints one JSON line per image: {"path", "score", "label"} or {"path", "error"}.
import { readFileSync } from "node:fs";
import ort from "onnxruntime-node";
import jpeg from "jpeg-js";
import { PNG } from "pngjs";

function decode(path) {
  const bytes = readFileSync(path);
  const lower = path.toLowerCase();
  const rgba = lower.endsWith(".png") ? PNG.sync.read(bytes)
    : (lower.endsWith(".jpg") || lower.endsWith(".jpeg")) ? jpeg.decode(bytes, { useTArray: true })
    : null;
  if (!rgba) throw new Error("only PNG and JPEG files are decoded by this example");
  const { width, height, data } = rgba;
  const rgb = new Uint8Array(width * height * 3);
  for (let i = 0, j = 0; i < data.length; i += 4, j += 3) {
    // Transparent pixels are shown on white, as the Python toolkit reads them.
    const alpha = data[i + 3] / 255;
    for (let c = 0; c < 3; c++) rgb[j + c] = Math.round(data[i + c] * alpha + 255 * (1 - alpha));
  }
  return new ort.Tensor("uint8", rgb, [1, height, width, 3]);
}

async function main() {
  const [modelPath, ...images] = process.argv.slice(2);
  if (!modelPath || images.length === 0) {
    console.error("usage: node score.mjs model.onnx image.png [image.jpg ...]");
    process.exit(2);
  }
  const meta = JSON.parse(readFileSync(modelPath.replace(/\.onnx$/, ".json"), "utf8"));
  if (meta.input !== "image_u8") {
    console.error(`${modelPath} takes preprocessed tensors; export it with graph_preprocess=true`);
    process.exit(2);
  }
  const session = await ort.InferenceSession.create(modelPath);
  for (const path of images) {
    try {
      const result = await session.run({ [meta.input]: decode(path) });
      const score = result.score.data[0];
      console.log(JSON.stringify({ path, score, label: score >= meta.threshold ? 1 : 0 }));
    } catch (error) {
      console.log(JSON.stringify({ path, error: String(error.message || error) }));
    }
  }
}

main();
